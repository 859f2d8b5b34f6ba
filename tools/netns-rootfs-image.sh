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

copy_with_libs /usr/sbin/sshd /usr/sbin/sshd
copy_with_libs /bin/sh /bin/sh
for tool in cat ls echo id env uname sleep true mkdir rm ${IMAGE_EXTRA_BINARIES:-}; do
    path=$(command -v "$tool" || true)
    if [ -n "$path" ] && [ -x "$path" ]; then
        copy_with_libs "$path" "/usr/bin/$(basename "$path")"
    fi
done

mkdir -p "$root/etc" "$root/root" "$root/run/sshd" "$root/tmp" "$root/var/empty"
chmod 1777 "$root/tmp"
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
sshd:x:100:65534::/run/sshd:/usr/sbin/nologin
PASSWD
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
echo "PATH=/usr/bin:/bin:/usr/sbin" > "$root/etc/environment"

for fmt in ${formats//,/ }; do
    case "$fmt" in
        tar) tar -C "$root" --numeric-owner -cf "${output}.tar" . ;;
        tgz) tar -C "$root" --numeric-owner -czf "${output}.tgz" . ;;
        *) echo "format ${fmt} is not supported by $(basename "$0") (tar, tgz)" >&2; exit 1 ;;
    esac
    echo "wrote ${output}.${fmt}"
done
