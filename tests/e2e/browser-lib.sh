# browser-lib.sh — the dashboard tests' browser: Debian's Chromium driven by
# puppeteer-core from npm, installed once into ~/.cache/kiln/npm.  Sets
# CHROMIUM and PUPPETEER (the module's directory); need_browser WHAT says
# "skip WHAT" with the reason and returns 1 when either is missing.
PUPPETEER_VERSION=23.11.1
CHROMIUM=${KILN_CHROMIUM:-/usr/bin/chromium}
PKG=${KILN_PUPPETEER:-$HOME/.cache/kiln/npm/puppeteer-core-$PUPPETEER_VERSION}
PUPPETEER=$PKG/node_modules/puppeteer-core

need_browser() {
	if [ ! -x "$CHROMIUM" ]; then
		skip "$1" "no $CHROMIUM (deps/ui.txt: apt-get install chromium)"
		return 1
	fi
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		skip "$1" "node and npm are needed"
		return 1
	fi
	if [ ! -d "$PUPPETEER" ]; then
		mkdir -p "$PKG"
		if ! npm install --prefix "$PKG" --no-audit --no-fund "puppeteer-core@$PUPPETEER_VERSION" >"$T_TMP/npm.log" 2>&1; then
			skip "$1" "npm install puppeteer-core@$PUPPETEER_VERSION failed: $(tail -1 "$T_TMP/npm.log")"
			return 1
		fi
	fi
}
