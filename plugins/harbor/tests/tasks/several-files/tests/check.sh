#!/bin/bash
# check.sh NAME: exit 0 when the check NAME passes.
case "$1" in
    total) [ "$(cat /srv/report/total.txt)" = 136 ] ;;
    files) diff -u /tests/expected_files.txt /srv/report/files.txt ;;
    ignored) [ ! -e /srv/context/scratch ] ;;  # .dockerignore kept it out of the build
    offline) [ "$(ls /sys/class/net)" = lo ] ;;  # network_mode = "no-network": a loopback only
    *) exit 2 ;;
esac
