package shell

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// Bounds of the workdir watchdog's walk. A walk that reaches its bound
// cannot say what the rest holds, so it is never read as "under the cap":
// a workdir with more than workdirStartEntries entries before the run is
// refused (turn WorkdirBytes off and use a quota for such roots), and a run
// that adds workdirGrowthEntries or more is stopped as over the cap. Both
// keep one walk's cost bounded however many files a command makes.
const (
	workdirStartEntries  = 1_000_000
	workdirGrowthEntries = 100_000
	workdirPollInterval  = 200 * time.Millisecond
)

// workdirUsage is what one walk of a workdir found.
type workdirUsage struct {
	bytes   int64 // sum of regular files' sizes (apparent size; hard links count each time)
	entries int
	// tooMany: the walk stopped at its entry bound; unreadable: it could
	// not read a directory. Either way bytes may miss files.
	tooMany    bool
	unreadable string
}

// measureWorkdir walks dir without following symbolic links, summing the
// sizes of regular files, and stops after maxEntries entries. Entries that
// vanish during the walk (the command deleting them) are skipped; any other
// error makes the walk incomplete.
func measureWorkdir(dir string, maxEntries int) workdirUsage {
	var u workdirUsage
	errStop := errors.New("stop")
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			u.unreadable = fmt.Sprintf("cannot read %s: %v", relTo(dir, p), err)
			return errStop
		}
		if p == dir {
			return nil
		}
		u.entries++
		if u.entries > maxEntries {
			u.tooMany = true
			return errStop
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil //nolint:nilerr // removed since it was listed
		}
		u.bytes += info.Size()
		return nil
	})
	return u
}

func relTo(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}

// workdirWatch stops a run whose workdir grows by more than a cap. It is a
// watchdog, not a quota: it polls, so a command can overshoot by what it
// writes in one interval (each file bounded by RLIMIT_FSIZE).
type workdirWatch struct {
	dir        string
	limit      int64 // bytes the run may add
	maxEntries int   // entries the run may add
	start      workdirUsage
}

// newWorkdirWatch measures dir before the run; nil when limit is off. A
// workdir too large to measure is refused.
func newWorkdirWatch(dir string, limit int64, growthEntries int) (*workdirWatch, string) {
	if limit <= 0 {
		return nil, ""
	}
	start := measureWorkdir(dir, workdirStartEntries)
	switch {
	case start.tooMany:
		return nil, fmt.Sprintf("workdir has more than %d files and directories, too many to watch its size", workdirStartEntries)
	case start.unreadable != "":
		return nil, fmt.Sprintf("workdir cannot be measured for its size limit (%s)", start.unreadable)
	}
	return &workdirWatch{dir: dir, limit: limit, maxEntries: growthEntries, start: start}, ""
}

// over says why the workdir is past its cap, or "".
func (w *workdirWatch) over() string {
	now := measureWorkdir(w.dir, w.start.entries+w.maxEntries)
	switch {
	case now.tooMany:
		return fmt.Sprintf("workdir grew by more than %d files and directories", w.maxEntries)
	case now.unreadable != "":
		return fmt.Sprintf("workdir cannot be measured for its size limit of %s (%s)", mib(w.limit), now.unreadable)
	case now.bytes-w.start.bytes > w.limit:
		return fmt.Sprintf("workdir grew past %s", mib(w.limit))
	}
	return ""
}

// watch polls until done is closed, calling stop once with the reason when
// the workdir is past its cap.
func (w *workdirWatch) watch(done <-chan struct{}, stop func(why string)) {
	t := time.NewTimer(workdirPollInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if why := w.over(); why != "" {
				stop(why)
				return
			}
			t.Reset(workdirPollInterval)
		}
	}
}

// mib formats a byte count as MiB when it is a whole number of them.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
