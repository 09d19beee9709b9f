#!/bin/bash
set -euo pipefail
total=0
for f in /srv/data/*.txt; do
    while read -r n; do total=$((total + n)); done < "$f"
done
echo "$total" > /srv/report/total.txt
ls /srv/data | sort > /srv/report/files.txt
