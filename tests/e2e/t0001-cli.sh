#!/usr/bin/env bash
# t0001-cli.sh — the CLI's conventions: help, version, exit codes 0/1/2.
. tests/e2e/lib.sh

expect_exit 0 "kiln --help exits 0" "$KILN" --help
expect_grep "kiln --help lists commands" '^  version ' "$T_TMP/out"
expect_exit 0 "kiln version exits 0" "$KILN" version
expect_grep "kiln version prints the version" '^kiln [0-9]+\.[0-9]+\.[0-9]+$' "$T_TMP/out"
expect_exit 0 "kiln --version" "$KILN" --version
expect_exit 0 "kiln version --help" "$KILN" version --help
expect_grep "command help shows usage" '^Usage: kiln version' "$T_TMP/out"
expect_exit 0 "kiln help version" "$KILN" help version
expect_exit 2 "unknown command exits 2" "$KILN" no-such-command
expect_grep "unknown command is named" "unknown command 'no-such-command'" "$T_TMP/err"
expect_exit 2 "unknown global flag exits 2" "$KILN" --bogus
expect_exit 2 "unknown command flag exits 2" "$KILN" version --bogus
expect_grep "unknown flag is named" 'unknown option --bogus' "$T_TMP/err"
expect_exit 2 "no command exits 2" "$KILN"
expect_exit 2 "bad --log level exits 2" "$KILN" --log loud version
