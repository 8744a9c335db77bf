package molecule

// Replies out: notify to the canvas, A2A message/send to a peer, and the rules that decide
// whether a failed attempt is sent again. The wire facts are in docs/molecule.md ("Peers and
// delegation"), each with the platform source it was read from.

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// errFateUnknown is wrapped by a delivery given up on because two attempts were sent and their
// answers lost: notify has no deduplication, so a third copy could be a third bubble.
var errFateUnknown = errors.New("the platform's answer was lost twice; not sending a third copy")

// refusalReason says in a few words why the platform refused a reply for good, for the log.
func refusalReason(route string, err error) string {
	var he *platform.HTTPError
	if !errors.As(err, &he) {
		return "the reply cannot be sent"
	}
	switch {
	case route == routeA2A && he.Status == http.StatusPaymentRequired:
		return "the peer workspace is over its spending budget (402)"
	case route == routeA2A && he.Status == http.StatusForbidden:
		return "this workspace may not message that peer (403: hierarchy, another org, or can_delegate off)"
	case he.Status == http.StatusRequestEntityTooLarge:
		return "the reply is larger than the platform takes (413)"
	case route == routeNotify && he.Status == http.StatusForbidden:
		return "this workspace may not talk to its canvas user (403 talk_to_user_disabled)"
	case he.Status == http.StatusNotFound:
		return "the workspace does not exist (404)"
	}
	return fmt.Sprintf("HTTP %d", he.Status)
}

// Every text the daemon sends the platform (replies, prompts, notes, the heartbeat's
// current_task and sample_error) passes the redactor here, at the one door out, whatever its
// caller did: codex may have read the token, and a text built in a new place must not be the one
// that carries it. Callers that cut a text redact it before the cut too (see currentTask), since
// a cut can leave a token's head that no longer matches.
