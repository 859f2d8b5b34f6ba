#!/bin/bash
# A dib-cmd for the netns provider: instead of running diskimage-builder,
# build a small root filesystem in which sshd can run, from this machine's
# own binaries, and leave it as OUTPUT.tar.
#
#   diskimages:
#     - name: tiny
#       dib-cmd: /path/to/tools/netns-rootfs-image.sh
#       formats: [tar]
#
# It takes disk-image-create's arguments (-t FORMATS -o OUTPUT, options,
# elements).  The image holds sshd, a shell and a few tools with their
# libraries, root and sshd users, and /etc/nodepool-image describing the
# build (the output name, elements, DIB_RELEASE, and $IMAGE_MARKER if set).
# Extra programs to include: $IMAGE_EXTRA_BINARIES (space separated).
#
# A worker image (what zuul-jobs' roles expect of a node: python3, pip,
# git, rsync, bash and the usual tools): IMAGE_HOST_USR=1 gives the image
# this machine's /usr (without /usr/local), hard-linked when it is on the
# same file system (a node's writes go to its own overlay layer, never
# into the image), with / links as on a merged-/usr system and the /etc
# files the dynamic linker, python and git read.  IMAGE_PIP_PACKAGES
# (space separated requirements) are then installed into the image's
# /usr/local with the image's own python3, from the package registry.
#
# Formats: tar, tgz, or dir (the root filesystem left as the directory
# OUTPUT, for a netns label's ``rootfs``).
set -euo pipefail

formats=qcow2
output=image
elements=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) formats=$2; shift 2 ;;
        -o) output=$2; shift 2 ;;
        -a|--image-size|--image-cache|--logfile|--qemu-img-options|-p) shift 2 ;;
        -*) shift ;;
        *) elements+=("$1"); shift ;;
    esac
done

echo "building a root filesystem for ${output} (formats ${formats}; elements ${elements[*]:-none})"
root=$(mktemp -d "${output}.rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT
chmod 755 "$root"

copy_with_libs() {
    local bin=$1 dest=$2
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$bin" "$root$dest"
    ldd "$bin" 2>/dev/null | awk '/=> \// {print $3} /^\t\// {print $1}' | while read -r lib; do
        [ -e "$root$lib" ] || cp -L --parents "$lib" "$root"
    done
}

host_usr() {
    # /usr hard-linked (copied across file systems); /usr/local empty.
    cp -al /usr "$root/usr" 2>/dev/null || { rm -rf "${root:?}/usr"; cp -a /usr "$root/usr"; }
    rm -rf "${root:?}/usr/local"
    mkdir -p "$root/usr/local/bin"
    for link in bin sbin lib lib64 lib32 libx32; do
        if [ -L "/$link" ]; then ln -s "$(readlink "/$link")" "$root/$link"; fi
    done
    mkdir -p "$root/etc"
    for f in ld.so.cache ld.so.conf ld.so.conf.d python3 "python3.$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')" \
             nsswitch.conf ssl ca-certificates ca-certificates.conf gitconfig; do
        [ -e "/etc/$f" ] && cp -a "/etc/$f" "$root/etc/" || true
    done
}

if [ "${IMAGE_HOST_USR:-}" = 1 ]; then
    host_usr
else
    copy_with_libs /usr/sbin/sshd /usr/sbin/sshd
    copy_with_libs /bin/sh /bin/sh
fi
for tool in cat ls echo id env uname sleep true mkdir rm ${IMAGE_EXTRA_BINARIES:-}; do
    path=$(command -v "$tool" || true)
    if [ -n "$path" ] && [ -x "$path" ] && [ ! -e "$root/usr/bin/$(basename "$path")" ]; then
        copy_with_libs "$path" "/usr/bin/$(basename "$path")"
    fi
done

mkdir -p "$root/etc" "$root/root" "$root/run/sshd" "$root/tmp" "$root/var/empty"
chmod 1777 "$root/tmp"
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
sshd:x:100:65534::/run/sshd:/usr/sbin/nologin
PASSWD
# No password (key logins only), but not a locked account: sshd refuses those.
cat > "$root/etc/shadow" <<'SHADOW'
root:*:19000:0:99999:7:::
sshd:*:19000:0:99999:7:::
SHADOW
chmod 640 "$root/etc/shadow"
cat > "$root/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
{
    echo "image=$(basename "$output")"
    echo "elements=${elements[*]:-}"
    echo "release=${DIB_RELEASE:-}"
    echo "marker=${IMAGE_MARKER:-}"
} > "$root/etc/nodepool-image"
echo "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin" > "$root/etc/environment"

if [ -n "${IMAGE_PIP_PACKAGES:-}" ]; then
    # The image's python3 (its /usr), installing into the image's /usr/local.
    # shellcheck disable=SC2086
    PYTHONNOUSERSITE=1 /usr/bin/python3 -m pip install --quiet --root "$root" \
        --ignore-installed --no-warn-script-location --break-system-packages $IMAGE_PIP_PACKAGES
fi

for fmt in ${formats//,/ }; do
    case "$fmt" in
        tar) tar -C "$root" --numeric-owner -cf "${output}.tar" . ;;
        tgz) tar -C "$root" --numeric-owner -czf "${output}.tgz" . ;;
        dir) rm -rf "$output"; cp -al "$root" "$output" ;;
        *) echo "format ${fmt} is not supported by $(basename "$0") (tar, tgz, dir)" >&2; exit 1 ;;
    esac
    if [ "$fmt" = dir ]; then echo "wrote ${output}/"; else echo "wrote ${output}.${fmt}"; fi
done
