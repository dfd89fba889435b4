package rotest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadOnly makes path (a file or a directory, with everything under it)
// read-only for this process until the test ends. As root it bind-mounts
// path read-only on itself (writes then fail with EROFS; the test is
// skipped when root may not mount, since mode bits would not stop it); otherwise it
// clears the write bits of path and of everything under it (EACCES), and
// puts them back at cleanup, so that t.TempDir can be removed.
func ReadOnly(t testing.TB, path string) {
	t.Helper()
	if os.Geteuid() == 0 {
		if err := unix.Mount(path, path, "", unix.MS_BIND, ""); err != nil {
			// Root without the right to mount (a container without
			// CAP_SYS_ADMIN): mode bits would not stop it, so nothing
			// here can make the path read-only for it.
			t.Skipf("bind mount %s on itself: %v (root is not stopped by mode bits: a read-only mount is the only way)", path, err)
		}
		t.Cleanup(func() {
			err := unix.Unmount(path, 0)
			if err == unix.EBUSY {
				// A file under it still open (a store closed in an
				// earlier cleanup): detach it now, freed once closed.
				err = unix.Unmount(path, unix.MNT_DETACH)
			}
			if err != nil {
				t.Errorf("unmount %s: %v", path, err)
			}
		})
		if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount %s read-only: %v", path, err)
		}
		return
	}
	modes := map[string]fs.FileMode{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		modes[p] = fi.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatalf("read-only %s: %v", path, err)
	}
	t.Cleanup(func() {
		for p, m := range modes {
			if err := os.Chmod(p, m); err != nil {
				t.Errorf("restore the mode of %s: %v", p, err)
			}
		}
	})
	for p, m := range modes {
		if err := os.Chmod(p, m&^0o222); err != nil {
			t.Fatalf("read-only %s: %v", p, err)
		}
	}
}
