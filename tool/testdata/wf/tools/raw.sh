#!/bin/sh
# Prints its arguments as its output, so a test chooses the exact bytes of a
# result object (as a Python or PHP tool would encode it).
cat
