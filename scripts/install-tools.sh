#!/usr/bin/env bash
# The command-line tools some tests drive, installed where this machine allows it:
# promtool (Debian/Ubuntu package "prometheus") runs the alert rule tests;
# chromium and chromedriver (packages "chromium", "chromium-driver") run the status page's
# browser tests through Selenium, with the distribution's browser: nothing downloads one.
# Without root or apt nothing is installed, and those tests say they are skipped and why.
# kubectl is not installed here: the distributions' kubectl packages are too old for kustomize
# components (the deploy tests skip the kubectl renders without it; see docs/troubleshooting.md).
set -uo pipefail

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "install-tools: not installing ${missing[*]} (needs root and apt-get); the tests that need them are skipped" >&2
    exit 0
fi
echo "install-tools: apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null; then
    echo "install-tools: could not install ${missing[*]}; the tests that need them are skipped" >&2
fi
exit 0
