#!/bin/sh
# Echoes its arguments back as the content and records the chat it ran for
# in the context variable seen_chat.
args=$(cat)
printf '{"content": %s, "context_updates": {"seen_chat": "%s"}}\n' "$args" "$BATON_CHAT_ID"
