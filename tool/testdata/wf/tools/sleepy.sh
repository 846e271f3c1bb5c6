#!/bin/sh
# Starts a child and a grandchild that sleep forever, writes every pid to
# $PID_FILE, then waits forever itself.
echo $$ >> "$PID_FILE"
sleep 100000 &
echo $! >> "$PID_FILE"
sh -c 'sleep 100000 & echo $! >> "$PID_FILE"; wait' &
echo $! >> "$PID_FILE"
wait
