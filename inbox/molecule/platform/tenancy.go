package platform

import (
	"errors"
	"net/http"
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
