// Package platform is the Molecule platform's HTTP client for one workspace (docs/molecule.md): the
// calls the inbox makes (register, heartbeat, the activity feed, ack, notify, A2A sends, uploads,
// the workspace's state, the event stream, secrets), and what every call goes through. It knows
// nothing of the inbox that uses it; its fake is the whole platform's, package moleculetest.
//
// Calls never follow a redirect: the token stays with the platform URL's origin, and a reply's
// POST never becomes a GET whose 2xx looks like a delivery (platform.go). The platform limits
// requests (600 a minute per bucket, the whole org's when X-Molecule-Org-Id is sent): every call
// goes through one rate gate, closed by a 429 for its Retry-After or by a spent bucket until it
// refills, and optional traffic spends at most a quarter of what is left (ratelimit.go). The
// workspace token rotates in <configs>/.auth_token and is re-read when that file changes and
// after a 401 (token.go). A SaaS tenant's guard refuses calls without MOLECULE_ORG_ID
// (tenancy.go). The activity feed answers at most a page (500 rows) per call, so a cold start
// walks its window back with before_ts and a backlog reads on page after page (paging.go); each
// answer is read as a stream, one row at a time with a per-row cap, so memory does not grow
// with the page (rowscan.go). Every text that leaves, and every error that quotes an answer,
// passes the daemon's secret set.
package platform
