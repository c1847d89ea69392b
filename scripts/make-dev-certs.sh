#!/usr/bin/env bash
# Makes a local certificate authority and a server certificate it signs, with the openssl command
# line: for the demo, the deployment tests and a first trial (docs/operations.md#tls). In
# production, use your organisation's CA (or an ACME client) instead.
#
# usage: scripts/make-dev-certs.sh DIR [NAME...]
#   NAME  DNS names and IP addresses the server is dialled by (default: localhost 127.0.0.1 ::1)
#
# Writes DIR/ca.crt (give it to clients: --ca-file), DIR/ca.key (0600), DIR/server.crt and
# DIR/server.key (0600; the server's --tls-cert-file and --tls-key-file), and a second CA for
# agents' client certificates, DIR/cluster-ca.crt and DIR/cluster-ca.key (0600; the server's
# --cluster-ca-cert-file and --cluster-ca-key-file, docs/operations.md#cluster-certificates).
# CAs already in DIR are kept, so clients that trust them and certificates they issued go on
# working; the server pair is new at every run and replaces the old one atomically (key first),
# so a running server picks it up without a restart.
set -euo pipefail

dir=${1:?usage: $0 DIR [NAME...]}
shift
names=("$@")
((${#names[@]} > 0)) || names=(localhost 127.0.0.1 ::1)
command -v openssl >/dev/null || {
  echo "make-dev-certs: openssl is missing; run: make deps" >&2
  exit 1
}

san=""
for name in "${names[@]}"; do
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then san+="IP:$name,"; else san+="DNS:$name,"; fi
done
san=${san%,}

mkdir -p "$dir"
umask 077
if [[ ! -s "$dir/ca.crt" || ! -s "$dir/ca.key" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
    -subj "/CN=gpufed development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  chmod 0644 "$dir/ca.crt"
fi

if [[ ! -s "$dir/cluster-ca.crt" || ! -s "$dir/cluster-ca.key" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
    -subj "/CN=gpufed development cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$dir/cluster-ca.key" -out "$dir/cluster-ca.crt" 2>/dev/null
  chmod 0644 "$dir/cluster-ca.crt"
fi

work=$(mktemp -d "$dir/.new-XXXXXX")
trap 'rm -rf "$work"' EXIT
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=${names[0]}" -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth" "subjectAltName=$san" >"$work/ext.cnf"
openssl x509 -req -in "$work/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 -extfile "$work/ext.cnf" \
  -out "$work/server.crt" 2>/dev/null
chmod 0644 "$work/server.crt"
mv -f "$work/server.key" "$dir/server.key"
mv -f "$work/server.crt" "$dir/server.crt"
echo "make-dev-certs: $dir/server.crt for ${names[*]}, signed by $dir/ca.crt"
