package daemon

import (
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
)

// moleculeFlags are the Molecule inbox's: the poll and the event stream, the heartbeat, the
// platform calls, peer agents, what a canvas chat sees while its turn runs, and usage limits.
func moleculeFlags(e *envFlags, c *Config) func() error {
	e.dur(&c.PollInterval, "poll-interval", "CODEX_WARM_POLL_INTERVAL", molecule.DefaultPollInterval, "Molecule activity poll interval (the platform allows 600 requests a minute, shared by the whole org when MOLECULE_ORG_ID is set); with the event stream up, the poll runs every --safety-poll-interval instead")
	e.bool(&c.EventStream, "event-stream", "CODEX_WARM_EVENT_STREAM", true, "Molecule: subscribe to the workspace's event stream and poll as soon as it announces a message (false: poll every --poll-interval only)")
	e.bool(&c.ToolChips, "tool-chips", "CODEX_WARM_TOOL_CHIPS", true, "Molecule: show each completed tool call of a canvas chat's turn on the canvas as a tool chip (an agent_log row, at most one a second, dropped first when the rate budget runs low)")
	e.dur(&c.SafetyPollInterval, "safety-poll-interval", "CODEX_WARM_SAFETY_POLL_INTERVAL", molecule.DefaultSafetyPollInterval, "Molecule: the activity poll's interval while the event stream is up, to catch what the stream lost")
	e.dur(&c.HeartbeatInterval, "heartbeat-interval", "CODEX_WARM_HEARTBEAT_INTERVAL", molecule.DefaultHeartbeatInterval, "Molecule heartbeat interval (the heartbeat's current_task shows what each running turn does)")
	e.dur(&c.PlatformTimeout, "platform-timeout", "CODEX_WARM_PLATFORM_TIMEOUT", 30*time.Second, "bound on one Molecule platform call (poll, reply, heartbeat)")
	e.dur(&c.PeerTurnTimeout, "peer-turn-timeout", "CODEX_WARM_PEER_TURN_TIMEOUT", molecule.DefaultPeerTurnTimeout, "Molecule: how long a reply to a peer agent may wait for the peer's answer, sent as X-Timeout (a push peer answers after its whole turn)")
	e.int(&c.PeerExchanges, "peer-exchanges", "CODEX_WARM_PEER_EXCHANGES", molecule.DefaultPeerExchanges, "Molecule: answer at most this many messages in a row from one peer agent that came after a reply to it (answers to our answers); then its messages go unanswered (logged) until this workspace's canvas writes or the peer is quiet for 10 minutes, so two agents cannot answer each other forever")
	e.dur(&c.ProgressInterval, "progress-interval", "CODEX_WARM_PROGRESS_INTERVAL", 0, "Molecule: send a canvas chat a short progress note each interval while its turn runs (0: off)")
	e.dur(&c.ParkLimit, "park-limit", "CODEX_WARM_PARK_LIMIT", molecule.DefaultParkLimit, "Molecule: a message the account's usage limit holds waits for the reset this long at most (from its arrival); a later reset is answered with the limit and the reset time")
	return func() error {
		switch {
		case c.ProgressInterval < 0:
			return fmt.Errorf("--progress-interval %s: must be >= 0", c.ProgressInterval)
		case c.ParkLimit <= 0:
			return fmt.Errorf("--park-limit %s: must be > 0", c.ParkLimit)
		case c.PeerExchanges < 1:
			return fmt.Errorf("--peer-exchanges %d: must be >= 1", c.PeerExchanges)
		}
		return positive(durFlag{"poll-interval", c.PollInterval}, durFlag{"safety-poll-interval", c.SafetyPollInterval},
			durFlag{"heartbeat-interval", c.HeartbeatInterval}, durFlag{"platform-timeout", c.PlatformTimeout},
			durFlag{"peer-turn-timeout", c.PeerTurnTimeout})
	}
}
