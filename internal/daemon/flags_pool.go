package daemon

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// poolFlags are the pool's: how many codex children, their memory, their age, the spares, and
// how long a chat waits for a slot.
func poolFlags(e *envFlags, c *Config) func() error {
	e.dur(&c.SlotWait, "slot-wait", "CODEX_WARM_SLOT_WAIT", supervisor.DefaultSlotWait, "how long a new chat waits for a codex slot when all are busy before it is answered busy")
	e.int(&c.MaxSlotWaiters, "max-slot-waiters", "CODEX_WARM_MAX_SLOT_WAITERS", supervisor.DefaultMaxSlotWaiters, "chats waiting for a codex slot at once; more are answered busy at once")
	e.int(&c.MaxChildren, "max-children", "CODEX_WARM_MAX_CHILDREN", supervisor.DefaultMaxChildren, "hard cap on live codex children; the memory budget usually binds first")
	var budget, memLimit string
	e.str(&budget, "memory-budget", "CODEX_WARM_MEMORY_BUDGET", "", "bound on the codex children's summed PSS: a size (2GiB, 500MB), a fraction of MemAvailable at start (0.5), or off; default: half of MemAvailable")
	e.str(&memLimit, "child-memory-limit", "CODEX_WARM_CHILD_MEMORY_LIMIT", "2GiB", "recycle a codex child whose private memory passed this size (idle: at once; busy: after its turn); off disables")
	e.dur(&c.ChildMaxAge, "child-max-age", "CODEX_WARM_CHILD_MAX_AGE", 0, "recycle a codex child older than this (idle: at once; busy: after its turn); 0: never")
	e.int(&c.ChildMaxTurns, "child-max-turns", "CODEX_WARM_CHILD_MAX_TURNS", 0, "recycle a codex child after this many turns; 0: never")
	// One spare: a new chat's first message then skips spawn + initialize (~80 ms measured) and,
	// with no stored thread, thread/start (~22 ms). An idle spare costs ~12 MB private memory.
	e.int(&c.ThreadsPerChild, "threads-per-child", "CODEX_WARM_THREADS_PER_CHILD", 1, "chats' threads one codex child hosts; above 1 more chats stay warm per GB, and one crash touches up to this many chats (docs/operating.md)")
	e.int(&c.Spares, "spares", "CODEX_WARM_SPARES", 1, "codex children kept started, with a thread open, for new chats' first messages; they count against --max-children; 0 turns them off")
	e.bool(&c.WarmSpares, "warm-spares", "CODEX_WARM_WARM_SPARES", true, "before a spare is handed to a chat, run one throwaway turn in it against a canned model on loopback (nothing leaves the machine), so the chat's first message is as fast as its later ones")
	e.bool(&c.LeanChildren, "lean-children", "CODEX_WARM_LEAN_CHILDREN", true, "run codex children with features.skill_search=false and feedback.enabled=false unless codex's config sets them, and without SSL_CERT_DIR when SSL_CERT_FILE is that directory's bundle; false leaves both to codex's defaults and the environment")
	e.dur(&c.IdleTTL, "idle-ttl", "CODEX_WARM_IDLE_TTL", 15*time.Minute, "close a child idle for this long")
	e.dur(&c.HandshakeTimeout, "handshake-timeout", "CODEX_WARM_HANDSHAKE_TIMEOUT", 30*time.Second, "retire a child that does not finish initialize in time")
	return func() error {
		var err error
		if c.MemoryBudget, c.MemoryBudgetFraction, err = parseMemoryBudget(budget); err != nil {
			return fmt.Errorf("--memory-budget %q: %w", budget, err)
		}
		if c.ChildMemoryLimit, err = parseMemoryLimit(memLimit); err != nil {
			return fmt.Errorf("--child-memory-limit %q: %w", memLimit, err)
		}
		switch {
		case c.MaxChildren < 0:
			return fmt.Errorf("--max-children %d: must be >= 0", c.MaxChildren)
		case c.ThreadsPerChild < 1:
			return fmt.Errorf("--threads-per-child %d: must be >= 1", c.ThreadsPerChild)
		case c.Spares < 0:
			return fmt.Errorf("--spares %d: must be >= 0", c.Spares)
		case c.ChildMaxTurns < 0:
			return fmt.Errorf("--child-max-turns %d: must be >= 0", c.ChildMaxTurns)
		case c.ChildMaxAge < 0:
			return fmt.Errorf("--child-max-age %s: must be >= 0", c.ChildMaxAge)
		case c.MaxSlotWaiters < 1:
			return fmt.Errorf("--max-slot-waiters %d: must be >= 1", c.MaxSlotWaiters)
		}
		return positive(durFlag{"idle-ttl", c.IdleTTL}, durFlag{"handshake-timeout", c.HandshakeTimeout}, durFlag{"slot-wait", c.SlotWait})
	}
}

// byteUnits are the size suffixes parseBytes knows, lower-cased. A bare K, M, G or T is binary,
// as in docker's --memory; KB, MB, GB and TB are decimal.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// parseBytes reads a size: a number with an optional unit (2GiB, 500MB, 1.5G, 1073741824).
func parseBytes(v string) (int64, error) {
	t := strings.TrimSpace(v)
	num, unit := t, ""
	if i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G or T", unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("want a size such as 2GiB or 500MB")
	}
	b := f * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("larger than %d bytes", int64(math.MaxInt64))
	}
	return int64(b), nil
}

// parseMemoryBudget reads --memory-budget: empty for the default (bytes 0), off (bytes -1), a
// plain number above 0 and at most 1 for a fraction of MemAvailable, or a size.
func parseMemoryBudget(v string) (bytes int64, fraction float64, err error) {
	switch t := strings.TrimSpace(v); {
	case t == "":
		return 0, 0, nil
	case strings.EqualFold(t, "off"):
		return -1, 0, nil
	default:
		if f, err := strconv.ParseFloat(t, 64); err == nil && f <= 1 {
			if f <= 0 {
				return 0, 0, errors.New("want a size, a fraction of MemAvailable above 0, or off")
			}
			return 0, f, nil
		}
		b, err := parseBytes(t)
		if err != nil {
			return 0, 0, err
		}
		if b == 0 {
			return 0, 0, errors.New("a zero budget: say off for none")
		}
		return b, 0, nil
	}
}

// parseMemoryLimit reads --child-memory-limit: a size, or off (or 0) for none.
func parseMemoryLimit(v string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(v), "off") {
		return 0, nil
	}
	return parseBytes(v)
}
