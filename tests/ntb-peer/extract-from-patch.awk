# Prints the file `want` (a path in the tree, e.g. include/hw/misc/ntb_epf.h) that a patch creates: the new
# side of its hunk, counted from the hunk header so that nothing after it (the next file, the mail
# signature) leaks in. Fails if the patch has no hunk for that file, so the build stops rather than
# compiling against an empty header.
# usage: awk -v want=PATH -f extract-from-patch.awk PATCH
/^diff --git / { in_file = ($NF == "b/" want); left = 0; next }
in_file && left == 0 && /^@@ / {
	# "@@ -a,b +c,d @@": d new-side lines follow (",d" omitted means 1).
	split($3, range, ",")
	left = (2 in range) ? range[2] + 0 : 1
	found = 1
	next
}
in_file && left > 0 {
	tag = substr($0, 1, 1)
	if (tag == "+" || tag == " ") { print substr($0, 2); left-- }
	else if (tag == "") { print ""; left-- }	# a blank context line whose space was stripped
	next
}
END {
	if (!found) { print "extract-from-patch: no hunk for " want " in " FILENAME > "/dev/stderr"; exit 1 }
	if (left > 0) { print "extract-from-patch: " want " ends " left " lines early" > "/dev/stderr"; exit 1 }
}
