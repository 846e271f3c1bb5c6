#!/bin/sh
# Writes 8 MB to stdout.
head -c 8000000 /dev/zero | tr '\0' 'a'
