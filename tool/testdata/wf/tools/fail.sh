#!/bin/sh
# Fails with many lines on stderr.
cat >/dev/null
i=1
while [ $i -le 30 ]; do
  echo "stderr line $i" >&2
  i=$((i + 1))
done
echo "fatal: the thing broke" >&2
exit 3
