#!/bin/bash
passed=0
for check in total files ignored offline; do
    if bash /tests/check.sh "$check"; then passed=$((passed + 1)); else echo "FAILED: $check"; fi
done
echo "$passed of 4 checks passed"
if [ "$passed" = 4 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
