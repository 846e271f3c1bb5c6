#!/bin/sh
# A side effect: appends the effect key to $EFFECT_LOG.
cat >/dev/null
echo "$BATON_EFFECT_KEY" >> "$EFFECT_LOG"
echo "done"
