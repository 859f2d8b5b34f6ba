#!/usr/bin/env bash
# Install everything the system and its tests need on a Debian machine:
# the Debian packages (ZooKeeper, sshd, bubblewrap, git, iproute2) and a
# virtualenv in .venv holding this distribution and its Python dependencies.
# Safe to run again: it only installs what is missing.
set -euo pipefail
top="$(cd "$(dirname "$0")/.." && pwd)"
cd "$top"

# rsync: Ansible's synchronize (zuul-jobs roles, the corpus tier)
debs=(zookeeper libnetty-java openssh-server openssh-client bubblewrap git iproute2 chromium chromium-driver postgresql rsync)
# Debian's python3 needs python3-venv for virtualenvs; other builds carry it.
python3 -c 'import ensurepip' >/dev/null 2>&1 || debs+=(python3-venv)
missing=()
for p in "${debs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "== creating virtualenv .venv"
    "$py" -m venv .venv
fi
stamp=.venv/.installed-$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)
if [ ! -e "$stamp" ]; then
    echo "== installing Python dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e ".[test]"
    rm -f .venv/.installed-*
    touch "$stamp"
fi
