#!/usr/bin/env bash
# Installs what gpufed needs to build, test and run its demo on Debian 12 (bookworm).
#
# Everything comes from Debian's own archive through apt; nothing is downloaded from elsewhere.
# Idempotent and quick when everything is present: apt is only touched if a package is missing,
# so `make test` can call it on every run.
#
# Usage: scripts/install-deps.sh [--dev-tools | --clang-format]
#   --dev-tools     also the tools `make format` and `make tidy` use (clang-format, clang-tidy)
#   --clang-format  also clang-format only, what `make format-check` in CI needs (clang-tidy
#                   brings the whole clang toolchain with it)
#
# As root it installs what is missing. As another user it lists what is missing, prints the
# command to install it and exits 1.
set -euo pipefail

packages=(
  # Toolchain.
  build-essential g++ cmake ninja-build pkg-config ccache
  # Libraries (headers and CMake/pkg-config files).
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libpqxx-dev libpq-dev libssl-dev libspdlog-dev libcpp-httplib-dev prometheus-cpp-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  # JWTs from an identity provider (auth/jwt.cc): cpp-jwt, header-only, on nlohmann-json and
  # OpenSSL.
  libcpp-jwt-dev
  # The agent's GPU discovery parses `nvidia-smi -q -x` with it (agent/discovery.cc).
  libpugixml-dev
  # The trace simulator's CSV reader (sim/).
  libcsv-dev
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev
  # tests/service/prometheus_test.cc: `promtool check metrics` on what /metrics serves, and a
  # real Prometheus (/usr/bin/prometheus; the test starts and stops its own) scraping a server.
  # Its package enables a systemd unit; the tests do not use it.
  prometheus
  # The fuzz targets (tests/fuzz/, `make fuzz`, and the short pass of `make test`): Debian 12's
  # clang with its libFuzzer, ASan and UBSan runtimes (libclang-rt-14-dev is only recommended by
  # clang-14, and this script installs without recommends), and llvm-symbolizer (llvm-14) so that
  # a finding's stack trace names functions and lines.
  clang-14 libclang-rt-14-dev llvm-14
  # The embedded PostgreSQL the server starts, and the one tests start.
  postgresql-15 postgresql-client-15
  # systemd-analyze, which verifies the unit files in deploy/.
  systemd
  # scripts/demo.sh: curl polls /readyz, jq reads `gpufedctl -o json`; openssl makes the demo's
  # CA and server certificate (scripts/make-dev-certs.sh).
  curl jq ca-certificates openssl
)

dev_tools_flag=""
case "${1:-}" in
  --dev-tools)
    packages+=(clang-format clang-tidy)
    dev_tools_flag=" --dev-tools"
    shift
    ;;
  --clang-format)
    packages+=(clang-format)
    dev_tools_flag=" --clang-format"
    shift
    ;;
esac
if [[ $# -gt 0 ]]; then
  echo "usage: $0 [--dev-tools | --clang-format]" >&2
  exit 2
fi

if [[ -r /etc/os-release ]]; then
  # shellcheck disable=SC1091
  . /etc/os-release
  if [[ "${ID:-}" != "debian" || "${VERSION_ID:-}" != "12" ]]; then
    echo "warning: gpufed targets Debian 12; this is ${PRETTY_NAME:-unknown}." \
      "Package names or versions may differ." >&2
  fi
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "error: dpkg-query not found; install these packages by hand: ${packages[*]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  # "install ok installed" is the only state that means usable; half-installed or
  # config-files-only packages count as missing.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "deps: missing: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "error: installing packages needs root. Run one of:" >&2
  echo "  sudo $0${dev_tools_flag}" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
echo "deps: installed ${missing[*]}"
