package plugins

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// confinedFS is the file system a guest sees at one granted folder. Every
// operation goes through an os.Root opened on the folder when the plugin
// loaded: a path is resolved inside the root by the kernel, component by
// component, and a symbolic link that would lead out of it (whoever made
// it) is refused. The guest may create no link at all, symbolic or hard. A
// read-only grant refuses every operation that writes: opening for
// writing, creating, truncating, appending, mkdir, chmod, rename, unlink,
// rmdir and setting times.
type confinedFS struct {
	root     *os.Root
	readOnly bool
	files    *openFiles // the instance's count of open files, shared by its mounts
}

var _ experimentalsys.FS = (*confinedFS)(nil)

// rel turns a path wazero hands the file system (cleaned, relative to the
// mount, "." for the folder itself, maybe with a trailing slash, and with a
// leading slash when it is relative to a folder the guest opened) into a
// name for os.Root.
func rel(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// errnoOf maps an error of os.Root to the errno a guest understands; a path
// that escapes the root is "not permitted".
func errnoOf(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	if isEscape(err) {
		return experimentalsys.EPERM
	}
	return experimentalsys.UnwrapOSError(err)
}

// isEscape reports os.Root's refusal of a path leading out of the root (its
// error value is not exported; its text is part of the standard library's
// behaviour since Go 1.24).
func isEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

const writeFlags = experimentalsys.O_WRONLY | experimentalsys.O_RDWR | experimentalsys.O_CREAT |
	experimentalsys.O_TRUNC | experimentalsys.O_APPEND

func osFlags(oflag experimentalsys.Oflag) int {
	var flag int
	switch oflag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		flag = os.O_RDWR
	case experimentalsys.O_WRONLY:
		flag = os.O_WRONLY
	default:
		flag = os.O_RDONLY
	}
	for _, f := range []struct {
		o  experimentalsys.Oflag
		os int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND}, {experimentalsys.O_CREAT, os.O_CREATE},
		{experimentalsys.O_EXCL, os.O_EXCL}, {experimentalsys.O_SYNC, os.O_SYNC},
		{experimentalsys.O_TRUNC, os.O_TRUNC}, {experimentalsys.O_DIRECTORY, syscall.O_DIRECTORY},
		{experimentalsys.O_DSYNC, syscall.O_DSYNC}, {experimentalsys.O_NONBLOCK, syscall.O_NONBLOCK},
	} {
		if oflag&f.o != 0 {
			flag |= f.os
		}
	}
	return flag
}

// OpenFile opens a file or a folder inside the root.
func (c *confinedFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	name := rel(path)
	if c.readOnly && flag&writeFlags != 0 {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		if fi, err := c.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	if c.readOnly {
		perm = 0
	}
	if errno := c.files.take(); errno != 0 {
		return nil, errno
	}
	f, err := c.root.OpenFile(name, osFlags(flag), perm.Perm())
	if err != nil {
		c.files.give()
		return nil, errnoOf(err)
	}
	return &confinedFile{fs: c, name: name, flag: flag &^ (experimentalsys.O_CREAT | experimentalsys.O_TRUNC | experimentalsys.O_EXCL), file: f}, 0
}

// Lstat describes a path without following a final link.
func (c *confinedFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := c.root.Lstat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errnoOf(err)
	}
	return sys.NewStat_t(fi), 0
}

// Stat describes a path, following links that stay inside the root.
func (c *confinedFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := c.root.Stat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errnoOf(err)
	}
	return sys.NewStat_t(fi), 0
}

// Mkdir makes a folder inside the root.
func (c *confinedFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(c.root.Mkdir(rel(path), perm.Perm()))
}

// Chmod changes the permission bits of a path inside the root.
func (c *confinedFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(c.root.Chmod(rel(path), perm.Perm()))
}

// Rename moves a path to another inside the same root.
func (c *confinedFS) Rename(from, to string) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(c.root.Rename(rel(from), rel(to)))
}

// Rmdir removes an empty folder.
func (c *confinedFS) Rmdir(path string) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	name := rel(path)
	fi, err := c.root.Lstat(name)
	if err != nil {
		return errnoOf(err)
	}
	if !fi.IsDir() {
		return experimentalsys.ENOTDIR
	}
	return errnoOf(c.root.Remove(name))
}

// Unlink removes a file or a link (never what a link points to).
func (c *confinedFS) Unlink(path string) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	name := rel(path)
	fi, err := c.root.Lstat(name)
	if err != nil {
		return errnoOf(err)
	}
	if fi.IsDir() {
		return experimentalsys.EISDIR
	}
	return errnoOf(c.root.Remove(name))
}

// Link is refused: a guest makes no hard link.
func (c *confinedFS) Link(oldPath, newPath string) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return experimentalsys.EPERM
}

// Symlink is refused: a guest makes no symbolic link, whatever its target.
func (c *confinedFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return experimentalsys.EPERM
}

// Readlink reads the text of a link inside the root (following it is
// still confined).
func (c *confinedFS) Readlink(path string) (string, experimentalsys.Errno) {
	s, err := c.root.Readlink(rel(path))
	if err != nil {
		return "", errnoOf(err)
	}
	return s, 0
}

// Utimens sets the access and modification times of a path inside the root.
func (c *confinedFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	if c.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(c.root.Chtimes(rel(path), nsTime(atim), nsTime(mtim)))
}

// nsTime converts a WASI time, UTIME_OMIT being "leave it" (the zero time
// for os.Chtimes).
func nsTime(ns int64) time.Time {
	if ns == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// confinedFile is a file or folder opened through a confinedFS. Reopening
// (to rewind a folder, or to change append mode) goes through the root too.
type confinedFile struct {
	experimentalsys.UnimplementedFile
	fs     *confinedFS
	name   string
	flag   experimentalsys.Oflag
	file   *os.File
	closed bool
	rewind bool
	st     *sys.Stat_t
}

func (f *confinedFile) stat() (*sys.Stat_t, experimentalsys.Errno) {
	if f.st == nil {
		if _, errno := f.Stat(); errno != 0 {
			return nil, errno
		}
	}
	return f.st, 0
}

func (f *confinedFile) Dev() (uint64, experimentalsys.Errno) {
	st, errno := f.stat()
	if errno != 0 {
		return 0, errno
	}
	return st.Dev, 0
}

func (f *confinedFile) Ino() (sys.Inode, experimentalsys.Errno) {
	st, errno := f.stat()
	if errno != 0 {
		return 0, errno
	}
	return st.Ino, 0
}

func (f *confinedFile) IsDir() (bool, experimentalsys.Errno) {
	st, errno := f.stat()
	if errno != 0 {
		return false, errno
	}
	return st.Mode.IsDir(), 0
}

func (f *confinedFile) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

func (f *confinedFile) SetAppend(enable bool) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if enable && f.fs.readOnly {
		return experimentalsys.EROFS
	}
	if enable == f.IsAppend() {
		return 0
	}
	flag := f.flag &^ experimentalsys.O_APPEND
	if enable {
		flag |= experimentalsys.O_APPEND
	}
	if isDir, _ := f.IsDir(); isDir {
		f.flag = flag
		return 0
	}
	off, err := f.file.Seek(0, io.SeekCurrent)
	if err != nil {
		return errnoOf(err)
	}
	nf, errno := f.reopen(flag)
	if errno != 0 {
		return errno
	}
	if _, err := nf.Seek(off, io.SeekStart); err != nil {
		_ = nf.Close()
		return errnoOf(err)
	}
	_ = f.file.Close()
	f.file, f.flag = nf, flag
	return 0
}

// reopen opens the same name again through the root and checks that it is
// still the same file.
func (f *confinedFile) reopen(flag experimentalsys.Oflag) (*os.File, experimentalsys.Errno) {
	nf, err := f.fs.root.OpenFile(f.name, osFlags(flag), 0)
	if err != nil {
		return nil, errnoOf(err)
	}
	a, err1 := f.file.Stat()
	b, err2 := nf.Stat()
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		_ = nf.Close()
		return nil, experimentalsys.ENOENT
	}
	return nf, 0
}

func (f *confinedFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	if f.closed {
		return sys.Stat_t{}, experimentalsys.EBADF
	}
	fi, err := f.file.Stat()
	if err != nil {
		return sys.Stat_t{}, errnoOf(err)
	}
	st := sys.NewStat_t(fi)
	f.st = &st
	return st, 0
}

func (f *confinedFile) Read(buf []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.Read(buf)
	if err == io.EOF {
		err = nil
	}
	return n, f.fileErrno(err)
}

func (f *confinedFile) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.ReadAt(buf, off)
	if err == io.EOF {
		err = nil
	}
	return n, f.fileErrno(err)
}

// fileOffset is int64: wazero's File.Seek answers an Errno, not an error,
// and naming the offset type tells vet's io.Seeker check that this Seek is
// not meant to be one.
type fileOffset = int64

func (f *confinedFile) Seek(offset fileOffset, whence int) (int64, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if isDir, _ := f.IsDir(); isDir {
		if offset == 0 && whence == io.SeekStart {
			f.rewind = true // read the folder afresh on the next Readdir
			return 0, 0
		}
		return 0, experimentalsys.EISDIR
	}
	n, err := f.file.Seek(offset, whence)
	return n, f.fileErrno(err)
}

func (f *confinedFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if f.closed {
		return nil, experimentalsys.EBADF
	}
	if isDir, errno := f.IsDir(); errno != 0 || !isDir {
		return nil, experimentalsys.EBADF
	}
	if f.rewind {
		f.rewind = false
		nf, errno := f.reopen(f.flag)
		if errno != 0 {
			return nil, errno
		}
		_ = f.file.Close()
		f.file = nf
	}
	fis, err := f.file.Readdir(n)
	if err != nil && err != io.EOF {
		return nil, errnoOf(err)
	}
	out := make([]experimentalsys.Dirent, 0, len(fis))
	for _, fi := range fis {
		out = append(out, experimentalsys.Dirent{Name: fi.Name(), Ino: sys.NewStat_t(fi).Ino, Type: fi.Mode().Type()})
	}
	return out, 0
}

func (f *confinedFile) Write(buf []byte) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if f.fs.readOnly {
		return 0, experimentalsys.EBADF
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.Write(buf)
	return n, f.fileErrno(err)
}

func (f *confinedFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.closed {
		return 0, experimentalsys.EBADF
	}
	if f.fs.readOnly {
		return 0, experimentalsys.EBADF
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.WriteAt(buf, off)
	return n, f.fileErrno(err)
}

func (f *confinedFile) Truncate(size int64) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.fs.readOnly {
		return experimentalsys.EBADF
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	return f.fileErrno(f.file.Truncate(size))
}

func (f *confinedFile) Sync() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.fs.readOnly {
		return 0
	}
	return f.fileErrno(f.file.Sync())
}

func (f *confinedFile) Datasync() experimentalsys.Errno { return f.Sync() }

func (f *confinedFile) Utimens(atim, mtim int64) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.fs.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(f.fs.root.Chtimes(f.name, nsTime(atim), nsTime(mtim)))
}

func (f *confinedFile) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	f.fs.files.give()
	return errnoOf(f.file.Close())
}

// fileErrno maps an error of an operation on an open file; a folder read or
// written as a file is EISDIR, as POSIX says.
func (f *confinedFile) fileErrno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	errno := errnoOf(err)
	if errno == experimentalsys.EBADF || errno == experimentalsys.EINVAL {
		if isDir, _ := f.IsDir(); isDir {
			return experimentalsys.EISDIR
		}
	}
	return errno
}

// grantRoot is a granted folder opened when its plugin loaded.
type grantRoot struct {
	guest    string // where the guest sees it (the path it asked for)
	root     *os.Root
	readOnly bool
}

// openRoots opens each granted folder at the path it resolved to; the
// returned roots are closed with the plugin.
func openRoots(paths []PathGrant) ([]*grantRoot, error) {
	var out []*grantRoot
	for _, pg := range paths {
		r, err := os.OpenRoot(pg.Resolved)
		if err != nil {
			closeRoots(out)
			return nil, fmt.Errorf("granted folder %s: %w", pg.Path, err)
		}
		out = append(out, &grantRoot{guest: pg.Path, root: r, readOnly: pg.ReadOnly})
	}
	return out, nil
}

func closeRoots(roots []*grantRoot) {
	for _, r := range roots {
		_ = r.root.Close()
	}
}

// mountGrants makes the file system configuration of one instance's
// granted folders (a variable so that a benchmark can set the confined
// mounts against wazero's own).
var mountGrants = fsConfig

// fsConfig mounts each root, confined, at its guest path, every file opened
// through them counted in files; nil when none.
func fsConfig(roots []*grantRoot, files *openFiles) wazero.FSConfig {
	if len(roots) == 0 {
		return nil
	}
	cfg := wazero.NewFSConfig()
	for _, r := range roots {
		cfg = cfg.(sysfs.FSConfig).WithSysFSMount(&confinedFS{root: r.root, readOnly: r.readOnly, files: files}, r.guest)
	}
	return cfg
}

// openFiles counts the files and folders one instance holds open through its
// granted folders (each is a descriptor of the host's), against the
// instance's limit and the host's. A guest past either is refused
// (EMFILE, ENFILE); its files are closed when it closes them or when the
// instance is closed (discarded, unloaded).
type openFiles struct {
	n     atomic.Int64
	limit int64
	host  *hostFiles
	// refused is the errno of the last refusal (wasip1 EMFILE or ENFILE),
	// taken by path_open's wrapper to answer it instead of wazero's EIO.
	refused atomic.Uint32
}

// hostFiles counts the files every instance of every plugin holds open
// through granted folders.
type hostFiles struct {
	n     atomic.Int64
	limit int64
}

// The WASI errno values of a refused open (wazero's own errno set has
// neither: it would answer EIO).
const (
	wasiEIO    = 29
	wasiEMFILE = 33
	wasiENFILE = 41
)

// capFilesLimit is configured, at most half of a descriptor limit (soft);
// at least 1.
func capFilesLimit(configured int64, fdLimit uint64) int64 {
	if half := fdLimit / 2; half < uint64(configured) {
		return max(1, int64(half))
	}
	return configured
}

func newOpenFiles(limit int64, host *hostFiles) *openFiles {
	return &openFiles{limit: limit, host: host}
}

// take counts one more open file, or refuses it (EIO to wazero, the WASI
// errno noted in refused).
func (o *openFiles) take() experimentalsys.Errno {
	if o == nil {
		return 0
	}
	if o.n.Add(1) > o.limit {
		o.n.Add(-1)
		o.refused.Store(wasiEMFILE)
		return experimentalsys.EIO
	}
	if h := o.host; h != nil && h.n.Add(1) > h.limit {
		h.n.Add(-1)
		o.n.Add(-1)
		o.refused.Store(wasiENFILE)
		return experimentalsys.EIO
	}
	return 0
}

// give counts one open file out.
func (o *openFiles) give() {
	if o == nil {
		return
	}
	o.n.Add(-1)
	if o.host != nil {
		o.host.n.Add(-1)
	}
}
