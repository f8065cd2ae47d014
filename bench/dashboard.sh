#!/usr/bin/env bash
# dashboard.sh — the dashboard's first paint of the templates page with 1,000
# tags in headless Chromium (docs/dashboard.md): runs t1100 ROUNDS times (it
# pushes the tags and measures) and prints its figure lines.  Usage: [ROUNDS]
set -u
cd "$(dirname "$0")/.."
for _ in $(seq "${1:-3}"); do
	make -s test T=t1100 2>&1 | grep -E '^# 1000 tags|passed, '
done
