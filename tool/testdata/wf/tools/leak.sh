#!/bin/sh
# Echoes the secrets it got to stdout and stderr, as a careless tool would;
# fails when its arguments say "fail".
args=$(cat)
echo "my=$MY_SECRET other=${OTHER_SECRET:-none} ctx=$BATON_CONTEXT"
echo "debug: key is $MY_SECRET" >&2
case "$args" in *fail*) exit 1;; esac
