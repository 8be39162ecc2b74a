#!/usr/bin/env bash
# `npm run test:alerts`: the Prometheus alert rules checked (`promtool check rules`) and unit-tested
# (`promtool test rules deploy/prometheus/alerts.test.yml`: every alert firing and staying quiet).
# promtool ships in the distribution's prometheus package; without it, and as root with apt-get, the
# package is installed (at most 5 minutes). Exit status: 0 checked and passed, 1 a check or test
# failed, 3 promtool is not available here (nothing was checked; the message says why). On a host
# running systemd, installing the package also starts its Prometheus service (port 9090).
set -euo pipefail
cd "$(dirname "$0")/.."

RULES=deploy/prometheus/alerts.yml
TESTS=deploy/prometheus/alerts.test.yml

if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "alerts: promtool not found; installing the prometheus package with apt-get"
    if ! timeout 300 apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; then
      # The package lists may be missing or stale (a fresh container): refresh them once and retry.
      timeout 300 apt-get update -q >/dev/null 2>&1 || true
      timeout 300 apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || true
    fi
  fi
fi
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    why="it is not on PATH and cannot be installed here (needs root and apt-get)"
  else
    why="it is not on PATH and apt-get install prometheus did not provide it"
  fi
  echo "alerts: NOT CHECKED: promtool is unavailable: $why. Install Prometheus's promtool and rerun npm run test:alerts." >&2
  exit 3
fi

echo "alerts: $(promtool --version 2>&1 | head -n 1)"
promtool check rules "$RULES"
promtool test rules "$TESTS"
groups=$(grep -c '^  - name: ' "$TESTS")
evals=$(grep -c 'eval_time: ' "$TESTS")
echo "alerts: passed: promtool check rules ($(grep -c '^ *- alert: ' "$RULES") alerts) and test rules ($groups tests, $evals evaluations)"
