package daemon

import (
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// chatFlags are a chat's and its turns': a message that comes while a turn runs, the chat
// commands, the queue, and the bounds of a turn.
func chatFlags(e *envFlags, c *Config) func() error {
	e.bool(&c.ChatCommands, "chat-commands", "CODEX_WARM_CHAT_COMMANDS", true, "answer /stop, /new, /status and /help in chats; false sends them to codex as text")
	var busy string
	e.str(&busy, "busy", "CODEX_WARM_BUSY", string(supervisor.BusyQueue), "a message for a chat whose turn runs: queue (wait for its own turn), steer (join the running turn; one reply answers both) or interrupt (stop the running turn, then run)")
	e.int(&c.MaxQueue, "max-queue", "CODEX_WARM_MAX_QUEUE", 16, "messages waiting per chat before it answers busy")
	e.dur(&c.TurnTimeout, "turn-timeout", "CODEX_WARM_TURN_TIMEOUT", 600*time.Second, "interrupt a turn running this long")
	e.dur(&c.PostToolTimeout, "post-tool-timeout", "CODEX_WARM_POST_TOOL_TIMEOUT", 90*time.Second, "retire a child silent this long after a tool finished")
	e.dur(&c.ModelUnreachableTimeout, "model-unreachable-timeout", "CODEX_WARM_MODEL_UNREACHABLE_TIMEOUT", supervisor.DefaultModelUnreachable, "end a turn whose model service could not be reached this long (codex retries forever); the chat is told, Molecule messages are answered when it is back; later turns of the outage end at once")
	e.dur(&c.ModelSilentTimeout, "model-silent-timeout", "CODEX_WARM_MODEL_SILENT_TIMEOUT", supervisor.DefaultModelSilent, "end a turn whose model service accepted the request and sent nothing this long (codex waits on such a model for good), as an unreachable model; a model that starts answering is never cut by it (0: off)")
	e.dur(&c.ResumeSpacing, "resume-spacing", "CODEX_WARM_RESUME_SPACING", supervisor.DefaultResumeSpacing, "at a usage limit's reset, run the parked messages one every this long, oldest first")
	return func() error {
		var err error
		if c.Busy, err = supervisor.ParseBusyPolicy(busy); err != nil {
			return fmt.Errorf("--busy: %w", err)
		}
		switch {
		case c.MaxQueue < 1:
			return fmt.Errorf("--max-queue %d: must be >= 1", c.MaxQueue)
		case c.ModelUnreachableTimeout <= 0:
			return fmt.Errorf("--model-unreachable-timeout %s: must be > 0", c.ModelUnreachableTimeout)
		case c.ResumeSpacing <= 0:
			return fmt.Errorf("--resume-spacing %s: must be > 0", c.ResumeSpacing)
		}
		return positive(durFlag{"turn-timeout", c.TurnTimeout}, durFlag{"post-tool-timeout", c.PostToolTimeout})
	}
}
