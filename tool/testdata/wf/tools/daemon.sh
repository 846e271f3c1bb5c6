#!/bin/sh
# Leaves a child running (holding stdout) and exits at once.
cat >/dev/null
sleep 100000 &
echo $! >> "$PID_FILE"
echo started
