#!/usr/bin/env bash
# Fills the project-local cache (.cache/, git-ignored) with what the test matrix runs on,
# at the versions pinned in scripts/matrix.json:
#
#   .cache/nats-server/<version>/nats-server   Debian's nats-server packages, unpacked
#   .cache/node/<major>/node_modules/node-linux-<arch>/bin/node   Node.js runtimes (npm registry)
#   .cache/nats-client/<version>/node_modules/@nats-io/...        client versions of the peer range
#   .cache/better-sqlite3/<version>/node-<major>/better_sqlite3.node  the example sink's native
#                                   module built for each matrix Node.js (its nativeBinding option)
#
# Usage: scripts/fetch-nats-servers.sh            everything in the manifest
#        scripts/fetch-nats-servers.sh --servers  only the nats-server binaries
#        scripts/fetch-nats-servers.sh --system   only the distribution's own nats-server
#                                                 (what the tests fall back to when none is installed)
#
# No root needed and the system is left alone: apt runs on a private sources list, private
# package lists and a private download cache, all under .cache/apt. The mirror is read from
# the machine's own apt sources (or DEBIAN_MIRROR), so no host name is written here.
# Trust: apt checks each suite's InRelease signature against the Debian archive keyring
# (signed-by=, from the debian-archive-keyring package), the Packages index against the
# hashes in InRelease, and the downloaded .deb against the SHA256 in Packages. Without the
# keyring nothing is downloaded. npm checks each tarball against the registry's integrity hash.
#
# Idempotent: silent when everything is cached; one line per item fetched; on failure one
# line on stderr (details in .cache/fetch.log) and exit code 1.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.cache
LOG=$CACHE/fetch.log
MANIFEST=$ROOT/scripts/matrix.json
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
mkdir -p "$CACHE"
: >"$LOG"

fail() {
  echo "fetch-nats-servers: $*" >&2
  exit 1
}

# Reads the manifest with node (always present in this project).
manifest() {
  node -e '
    const m = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
    const what = process.argv[2];
    if (what === "servers") for (const [v, s] of Object.entries(m.natsServer)) console.log(`${v} ${s.suites.join(",")}`);
    if (what === "node") for (const [major, v] of Object.entries(m.node)) console.log(`${major} ${v}`);
    if (what === "clients") for (const v of m.clients) console.log(v);
  ' "$MANIFEST" "$1" || fail "cannot read $MANIFEST"
}

# The version a nats-server binary reports, for example 2.9.10.
binary_version() {
  "$1" --version 2>&1 | sed -n 's/.*v\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1
}

# The first Debian archive URI (not the security archive) in the machine's apt sources,
# one-line (*.list) or deb822 (*.sources) format.
debian_mirror() {
  if [[ -n ${DEBIAN_MIRROR:-} ]]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local files=()
  [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
  local f
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk '
    function debian_suite(s) { return s ~ /^(buster|bullseye|bookworm|trixie|forky|sid|oldstable|stable|testing|unstable)$/ }
    # deb822: decide at the end of a stanza (URIs: and Suites: may come in any order).
    function stanza(   n, k, a) {
      if (!found && uri != "") { n = split(suites, a, " "); for (k = 1; k <= n; k++) if (debian_suite(a[k])) { print uri; found = 1 } }
      uri = ""; suites = ""
    }
    FNR == 1 && NR > 1 { stanza() }
    /^[[:space:]]*#/ { next }
    # one-line: deb [options] uri suite components...
    $1 == "deb" {
      i = 2
      if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if (!found && debian_suite($(i + 1))) { print $i; found = 1 }
      next
    }
    /^URIs:/ { uri = $2 }
    /^Suites:/ { suites = ""; for (j = 2; j <= NF; j++) suites = suites " " $j }
    /^[[:space:]]*$/ { stanza() }
    END { stanza() }
  ' "${files[@]}"
}

apt_private() {
  # apt on private state: $1 = sources list file, the rest = apt-get arguments.
  local list=$1
  shift
  local user
  user=$(id -un)
  apt-get -q \
    -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::Cache="$CACHE/apt/cache" \
    -o Dir::State::status=/dev/null -o Debug::NoLocking=1 \
    -o APT::Sandbox::User="$user" "$@" >>"$LOG" 2>&1
}

apt_cache_private() {
  local list=$1
  shift
  apt-cache \
    -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::Cache="$CACHE/apt/cache" \
    -o Dir::State::status=/dev/null "$@" 2>>"$LOG"
}

need_apt() {
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    fail "apt-get and dpkg-deb are needed to fetch nats-server (not a Debian or Ubuntu machine?): install nats-server yourself and set NATS_SERVER_BIN"
  mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial" "$CACHE/apt/debs"
}

# Unpacks the nats-server of a downloaded .deb into .cache/nats-server/<version>/ and checks
# that the binary reports that version. $1 = .deb, $2 = expected version or "" for any.
install_deb() {
  local deb=$1 want=$2
  local tmp
  tmp=$(mktemp -d "$CACHE/unpack.XXXXXX")
  dpkg-deb -x "$deb" "$tmp" >>"$LOG" 2>&1 || { rm -rf "$tmp"; fail "cannot unpack $(basename "$deb") (see .cache/fetch.log)"; }
  local got
  got=$(binary_version "$tmp/usr/sbin/nats-server")
  if [[ -z $got || (-n $want && $got != "$want") ]]; then
    rm -rf "$tmp"
    fail "$(basename "$deb") holds nats-server '${got:-?}', expected ${want:-a version}"
  fi
  mkdir -p "$CACHE/nats-server/$got"
  mv "$tmp/usr/sbin/nats-server" "$CACHE/nats-server/$got/nats-server"
  {
    echo "package: $(basename "$deb")"
    echo "sha256: $(sha256sum "$deb" | cut -d' ' -f1)"
    echo "verified: InRelease signature by apt (keyring in the sources entry), .deb hash against the signed Packages index"
  } >"$CACHE/nats-server/$got/SOURCE"
  rm -rf "$tmp"
  echo "$got"
}

fetch_servers() {
  local missing=() line version suites
  while read -r version suites; do
    [[ -x $CACHE/nats-server/$version/nats-server ]] && continue
    # A binary of the same version already on the machine is copied, not downloaded.
    local local_bin
    for local_bin in "${NATS_SERVER_BIN:-}" "$(command -v nats-server 2>/dev/null)" /usr/sbin/nats-server; do
      if [[ -n $local_bin && -x $local_bin && $(binary_version "$local_bin") == "$version" ]]; then
        mkdir -p "$CACHE/nats-server/$version"
        cp "$local_bin" "$CACHE/nats-server/$version/nats-server"
        echo "copied: the machine's nats-server at $local_bin" >"$CACHE/nats-server/$version/SOURCE"
        echo "nats-server $version: copied from $local_bin"
        continue 2
      fi
    done
    missing+=("$version:$suites")
  done < <(manifest servers)
  ((${#missing[@]})) || return 0

  need_apt
  [[ -r $KEYRING ]] || fail "no Debian archive keyring at $KEYRING to verify the packages (Debian: apt-get install debian-archive-keyring)"
  local mirror
  mirror=$(debian_mirror)
  [[ -n $mirror ]] || fail "no Debian archive in the machine's apt sources: set DEBIAN_MIRROR to a Debian mirror URI"
  local list=$CACHE/apt/debian.list all_suites=()
  for line in "${missing[@]}"; do
    IFS=, read -r -a suites <<<"${line#*:}"
    all_suites+=("${suites[@]}")
  done
  local suite
  for suite in "${all_suites[@]}"; do
    echo "deb [signed-by=$KEYRING] $mirror $suite main"
  done | sort -u >"$list"
  apt_private "$list" update || fail "apt-get update on the private Debian sources failed (see .cache/fetch.log)"
  # A suite whose signature does not verify is only a warning to apt-get update: refuse it here.
  local problem
  problem=$(grep -m 1 "^[WE]: " "$LOG" | cut -c 1-240)
  [[ -z $problem ]] || fail "apt-get update on the private Debian sources: $problem"

  for line in "${missing[@]}"; do
    version=${line%%:*}
    # The Debian revision (-1, -1+b2) is packaging; the upstream version is what is pinned.
    local debver
    debver=$(apt_cache_private "$list" madison nats-server | awk -v v="$version" '$3 ~ "^" v "-" { print $3; exit }')
    [[ -n $debver ]] || fail "nats-server $version is not in Debian ${line#*:} any more: pick another version in scripts/matrix.json"
    rm -f "$CACHE/apt/debs/"nats-server_*.deb
    (cd "$CACHE/apt/debs" && apt_private "$list" download "nats-server=$debver") ||
      fail "apt-get download nats-server=$debver failed (see .cache/fetch.log)"
    install_deb "$CACHE/apt/debs/nats-server_${debver//:/%3a}_"*.deb "$version" >/dev/null
    echo "nats-server $version: fetched Debian $debver"
  done
}

# The distribution's own nats-server (its candidate in the machine's apt sources), for a
# machine that has none installed. The machine's sources and keys are used as they are;
# only the package lists are private.
fetch_system() {
  local marker=$CACHE/nats-server/distribution
  if [[ -f $marker && -x $CACHE/nats-server/$(cat "$marker")/nats-server ]]; then return 0; fi
  need_apt
  local user
  user=$(id -un)
  local opts=(-o Dir::Etc::sourcelist=/etc/apt/sources.list -o Dir::Etc::sourceparts=/etc/apt/sources.list.d
    -o Dir::State::Lists="$CACHE/apt/system-lists" -o Dir::Cache="$CACHE/apt/cache"
    -o Dir::State::status=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User="$user")
  mkdir -p "$CACHE/apt/system-lists/partial"
  apt-get -q "${opts[@]}" update >>"$LOG" 2>&1 || fail "apt-get update on the machine's sources failed (see .cache/fetch.log)"
  rm -f "$CACHE/apt/debs/"nats-server_*.deb
  (cd "$CACHE/apt/debs" && apt-get -q "${opts[@]}" download nats-server >>"$LOG" 2>&1) ||
    fail "the distribution has no nats-server package to download (see .cache/fetch.log): install one yourself and set NATS_SERVER_BIN"
  local version
  version=$(install_deb "$(ls "$CACHE/apt/debs/"nats-server_*.deb | head -n 1)" "") || exit 1
  echo "$version" >"$marker"
  echo "nats-server $version: fetched the distribution's package"
}

fetch_node() {
  local arch
  case $(uname -m) in
    x86_64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "no Node.js package for $(uname -m)" ;;
  esac
  local major version dir
  while read -r major version; do
    dir=$CACHE/node/$major
    if [[ -x $dir/node_modules/node-linux-$arch/bin/node ]] &&
      [[ $("$dir/node_modules/node-linux-$arch/bin/node" --version) == "v$version" ]]; then continue; fi
    rm -rf "$dir"
    npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
      "node-linux-$arch@$version" >>"$LOG" 2>&1 || fail "npm install node-linux-$arch@$version failed (see .cache/fetch.log)"
    echo "node $version: installed into .cache/node/$major"
  done < <(manifest node)
}

fetch_clients() {
  local version dir
  while read -r version; do
    dir=$CACHE/nats-client/$version
    [[ -f $dir/node_modules/@nats-io/jetstream/package.json && -f $dir/node_modules/@nats-io/transport-node/package.json ]] && continue
    rm -rf "$dir"
    mkdir -p "$dir"
    # One directory per version, so jetstream and transport-node share one @nats-io/nats-core.
    echo '{ "private": true }' >"$dir/package.json"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
      "@nats-io/jetstream@$version" "@nats-io/transport-node@$version" >>"$LOG" 2>&1 ||
      fail "npm install @nats-io/jetstream@$version failed (see .cache/fetch.log)"
    local copies
    copies=$(find "$dir/node_modules" -path '*/@nats-io/nats-core/package.json' | wc -l)
    [[ $copies -eq 1 ]] || fail "client $version installed $copies copies of @nats-io/nats-core, expected 1"
    echo "client $version: installed into .cache/nats-client/$version"
  done < <(manifest clients)
}

# better-sqlite3 (a devDependency: the synchronous sink of an example and a test) is a native
# module: the copy in node_modules is built for the Node.js that installed it. For every other
# Node.js of the matrix, build its pinned version from the registry's source tarball with
# npm's own node-gyp against that runtime's headers (a C++ toolchain and python3 needed).
fetch_sqlite() {
  local version
  version=$(node -p 'require("./package.json").devDependencies["better-sqlite3"] ?? ""') || fail "cannot read package.json"
  [[ -n $version ]] || return 0
  local gyp
  gyp=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js
  local arch
  case $(uname -m) in
    x86_64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "no Node.js package for $(uname -m)" ;;
  esac
  local major nodever out runtime src
  while read -r major nodever; do
    out=$CACHE/better-sqlite3/$version/node-$major/better_sqlite3.node
    [[ -f $out ]] && continue
    runtime=$CACHE/node/$major/node_modules/node-linux-$arch
    [[ -x $runtime/bin/node ]] || fail "no Node.js $major in .cache/node to build better-sqlite3 for"
    [[ -f $gyp ]] || fail "npm's node-gyp not found (looked at $gyp): cannot build better-sqlite3 for Node.js $major"
    src=$(mktemp -d)
    (cd "$src" && npm pack --silent "better-sqlite3@$version" >>"$LOG" 2>&1 && tar xzf better-sqlite3-*.tgz) ||
      fail "npm pack better-sqlite3@$version failed (see .cache/fetch.log)"
    (cd "$src/package" && PATH=$runtime/bin:$PATH node "$gyp" rebuild --release --nodedir="$runtime" -j "$(nproc)" >>"$LOG" 2>&1) ||
      fail "building better-sqlite3 $version for Node.js $nodever failed (a C++ toolchain, make and python3 are needed; see .cache/fetch.log)"
    mkdir -p "$(dirname "$out")"
    cp "$src/package/build/Release/better_sqlite3.node" "$out"
    rm -rf "$src"
    echo "better-sqlite3 $version: built for Node.js $nodever into .cache/better-sqlite3/$version/node-$major"
  done < <(manifest node)
}

node -e 'JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"))' "$MANIFEST" 2>>"$LOG" || fail "cannot read $MANIFEST"
case ${1:-all} in
  all) fetch_servers && fetch_node && fetch_clients && fetch_sqlite ;;
  --servers) fetch_servers ;;
  --system) fetch_system ;;
  *) fail "unknown argument $1: use no argument, --servers or --system" ;;
esac
