package platform

import (
	"errors"
	"net/http"

	"github.com/cenkalti/backoff/v4"
)

// OrgIDHint is what to do about the tenant guard's 400 TENANT_ORG_HEADER_REQUIRED.
const OrgIDHint = "the platform is a SaaS tenant and needs X-Molecule-Org-Id on every call but register and heartbeat: " +
	"set MOLECULE_ORG_ID to the organization's UUID and restart the daemon"

// IsTenantOrgRequired reports the tenant guard's refusal of a call without X-Molecule-Org-Id.
func IsTenantOrgRequired(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.TenantOrgRequired()
}

// IsRateLimited reports a 429.
func IsRateLimited(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.RateLimited()
}

// RetryableStatus says whether an HTTP status may go away by itself.
func RetryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// Permanent says whether a failed call cannot go away by retrying: client
// errors (403 talk_to_user_disabled, 404 workspace not found, 400, 413, ...). 401 is retried: the
// reply is kept until an operator fixes the token (a restart delivers it from the state file).
// So is the tenant guard's 400 for a missing X-Molecule-Org-Id: the reply is fine, the daemon's
// MOLECULE_ORG_ID is missing.
// A redirect (3xx) is retried like a 5xx: the reply did not reach the platform, and a platform
// being moved is an outage, not a refusal.
func Permanent(err error) bool {
	var pe *backoff.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var he *HTTPError
	if !errors.As(err, &he) {
		return false
	}
	return he.Status != http.StatusUnauthorized && !he.TenantOrgRequired() && !RetryableStatus(he.Status) && he.Status >= 400
}
