package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/control"
)

// Free space under CODEX_HOME below either bound gets a warning: codex writes about 13 KB per
// turn there that it keeps (rollouts, its thread database) and writes far more that it prunes
// (logs, WAL files); a full disk fails turns in ways the chats only see as errors. See
// docs/disk-and-growth.md.
const (
	diskWarnFreeBytes = 2 << 30
	diskWarnFreePct   = 5
)

// checkDisk reports the free space of the filesystem CODEX_HOME is on (its nearest existing
// folder, before `codex login` creates it).
func (d *doctor) checkDisk() Result {
	const name = "disk"
	home := appserver.EffectiveCodexHome(d.env)
	dir := home
	var st syscall.Statfs_t
	for {
		err := syscall.Statfs(dir, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return warn(name, fmt.Sprintf("free space under %s unknown: %v", home, err), "")
		}
		dir = parent
	}
	free, total := st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
	detail := fmt.Sprintf("%s free of %s under %s", control.HumanBytes(int64(free)), control.HumanBytes(int64(total)), dir)
	if lowDisk(free, total) {
		return warn(name, detail+fmt.Sprintf(": below %s or %d%%; codex keeps about 13 KB per turn and 49 KB per new chat in CODEX_HOME and needs room for its logs", control.HumanBytes(diskWarnFreeBytes), diskWarnFreePct),
			"free space or move CODEX_HOME to a larger disk; docs/disk-and-growth.md says what grows and what can be pruned")
	}
	return ok(name, "%s", detail)
}

// lowDisk reports free space below diskWarnFreeBytes or below diskWarnFreePct of total.
func lowDisk(free, total uint64) bool {
	return free < diskWarnFreeBytes || (total > 0 && free*100 < total*diskWarnFreePct)
}
