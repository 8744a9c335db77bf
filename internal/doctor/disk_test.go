package doctor

import "testing"

// The disk warning's bounds: an absolute floor and a share of the disk, whichever binds first.
func TestLowDisk(t *testing.T) {
	for _, c := range []struct {
		free, total uint64
		low         bool
	}{
		{free: 1 << 30, total: 1 << 40, low: true},   // 1 GiB free: below the floor
		{free: 10 << 30, total: 1 << 40, low: true},  // 10 GiB of 1 TiB: below 5 %
		{free: 60 << 30, total: 1 << 40, low: false}, // 60 GiB of 1 TiB
		{free: 3 << 30, total: 10 << 30, low: false}, // small disk, 30 % free
		{free: 3 << 30, total: 0, low: false},        // total unknown: the floor alone
	} {
		if got := lowDisk(c.free, c.total); got != c.low {
			t.Errorf("lowDisk(%d, %d) = %v, want %v", c.free, c.total, got, c.low)
		}
	}
}
