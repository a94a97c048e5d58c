#!/usr/bin/env bash
# The headless browser the web page tests drive (tests/serve/test_webui.py): Debian's chromium.
# Idempotent: does nothing where a chromium is already installed; installs the Debian package only
# as root with apt-get; otherwise says why not and exits 0 (the browser tests then skip, saying so).
set -u
for name in "${HOPGRAPH_CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [ -n "$name" ] && command -v "$name" >/dev/null 2>&1; then
    echo "install_browser: using $(command -v "$name")"
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no chromium found and no apt-get here; install chromium to run the browser tests"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "install_browser: no chromium found and not root; run: sudo apt-get install -y chromium"
  exit 0
fi
echo "install_browser: installing Debian's chromium"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
  echo "install_browser: apt-get could not install chromium; the browser tests will skip"
fi
exit 0
