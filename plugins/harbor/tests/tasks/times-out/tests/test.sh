#!/bin/bash
# The reward says whether the work got done (it cannot: 0). What the cancelled command
# left running goes to /logs/verifier/leftover.txt (nothing, when its tree was killed).
for cmdline in /proc/[0-9]*/cmdline; do
    tr '\0' ' ' < "$cmdline" 2>/dev/null | grep -q '^sleep 600' && echo "${cmdline%/cmdline}"
done > /logs/verifier/leftover.txt
if [ "$(cat /app/out.txt 2>/dev/null)" = done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
