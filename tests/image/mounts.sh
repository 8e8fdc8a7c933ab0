# Sourced by tests/image/run.sh (and its test in tests/docker): what a chroot
# left mounted under a folder, unmounted.
#
# debootstrap mounts /proc (and on some hosts /sys and /dev/pts) in the
# root it makes, and does not always unmount them when it ends or fails;
# tar then walks the live /proc, and the mounts outlive the run.

# Unmounts every mount point under $1, the deepest first; a busy one is
# detached (umount -l). Fails, naming them, if any is left.
unmount_under() {
	local dir mp left
	dir=$(realpath -m "$1")
	# mountinfo's fifth field is the mount point (octal escapes for blanks,
	# which these paths do not hold).
	while read -r mp; do
		umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
	done < <(awk -v d="$dir/" 'index($5 "/", d) == 1 { print length($5), $5 }' /proc/self/mountinfo |
		sort -rn | cut -d' ' -f2-)
	left=$(awk -v d="$dir/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo)
	if [ -n "$left" ]; then
		printf 'still mounted under %s: %s\n' "$dir" "$left" >&2
		return 1
	fi
}
