/* beneath: opening a path below a directory without ever leaving it.
 *
 * Every file of the models root is opened relative to the root's
 * descriptor, by a path whose every step is checked while it is resolved:
 * by the kernel (openat2 with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where
 * it has openat2, otherwise by walking the path one component at a time with
 * O_NOFOLLOW from descriptors and expanding each symlink by hand. A symlink
 * is followed only when where it leads stays below the root; nothing relies
 * on a path that was checked earlier, so swapping a file for a symlink
 * between a scan and an open leads nowhere outside.
 *
 * Absolute symlinks are followed when they point into the root by its real
 * path (openat2 refuses every absolute link; those take the walk). */
#ifndef TENSORD_BENEATH_H
#define TENSORD_BENEATH_H

/* Opens rel (relative, '/'-separated) below rootfd, whose real path is
 * root, with open flags `flags` (O_CLOEXEC is added; O_CREAT is not
 * supported). Returns the descriptor, or a negative errno: -EXDEV when the
 * path leads outside the root, -ELOOP after too many symlinks, and what the
 * open itself failed with otherwise. */
int beneath_open(int rootfd, const char *root, const char *rel, int flags);

/* The component walk alone, without trying openat2 first: what
 * beneath_open does on kernels without openat2, and always when the
 * environment has TENSORD_BENEATH_WALK=1 (for the tests). */
int beneath_open_walk(int rootfd, const char *root, const char *rel, int flags);

#endif
