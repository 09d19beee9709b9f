#!/bin/bash
# Runs in the task's working directory (/app, the image's WORKDIR).
if [ "$(pwd)" = /app ] && [ "$(cat hello.txt 2>/dev/null)" = "Hello, world!" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "pwd=$(pwd) hello.txt=$(cat hello.txt 2>&1)"
    echo 0 > /logs/verifier/reward.txt
fi
