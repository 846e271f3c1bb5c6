#!/bin/sh
# Prints the BATON_* environment and whether a secret and an unlisted
# variable reached it, as plain text.
env | grep -E '^(BATON_|MY_SECRET=|PASSED_VAR=|NOT_PASSED=)' | sort
