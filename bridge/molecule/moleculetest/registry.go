package moleculetest

// Register and heartbeat, as the platform's registry.go answers them.

import (
	"encoding/json"
	"net/http"
)

func (p *Platform) register(_ *http.Request, body []byte) (int, any) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["id"] != p.cfg.WorkspaceID || m["delivery_mode"] != "poll" {
		return http.StatusBadRequest, map[string]string{"error": "bad register body"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.registers = append(p.registers, m)
	// registry.go Register: {"status","delivery_mode", "auth_token" only for a workspace without
	// a live token, "platform_inbound_secret"}.
	mode := p.cfg.DeliveryMode
	if mode == "" {
		mode, _ = m["delivery_mode"].(string)
	}
	answer := map[string]string{"status": "registered", "delivery_mode": mode, "platform_inbound_secret": p.inbound}
	if tok, ok := p.issueTokenLocked(); ok {
		answer["auth_token"] = tok
	}
	// registry.go:1232-1236 (the card as registered; the platform may reconcile its name).
	agentURL, _ := m["url"].(string)
	p.broadcastLocked(EventWorkspaceOnline, map[string]any{"url": agentURL, "agent_card": m["agent_card"], "delivery_mode": mode})
	return http.StatusOK, answer
}

func (p *Platform) heartbeat(_ *http.Request, body []byte) (int, any) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["workspace_id"] != p.cfg.WorkspaceID {
		return http.StatusBadRequest, map[string]string{"error": "bad heartbeat body"}
	}
	for _, k := range []string{"error_rate", "sample_error", "active_tasks", "current_task", "uptime_seconds"} {
		if _, ok := m[k]; !ok {
			return http.StatusBadRequest, map[string]string{"error": "heartbeat lacks " + k}
		}
	}
	p.mu.Lock()
	p.heartbeats = append(p.heartbeats, m)
	p.heartbeatStatusLocked(m)
	// registry.go:1619-1625: TASK_UPDATED when current_task differs from the stored one ("" for
	// a new workspace); 1642-1645: WORKSPACE_HEARTBEAT on every beat.
	if task, _ := m["current_task"].(string); task != p.events.task {
		p.events.task = task
		p.broadcastLocked(EventTaskUpdated, map[string]any{"current_task": task, "active_tasks": m["active_tasks"]})
	}
	p.broadcastLocked(EventWorkspaceHeartbeat, map[string]any{"active_tasks": m["active_tasks"], "uptime_seconds": m["uptime_seconds"]})
	// registry.go Heartbeat answers {"status":"ok","generation":N,"platform_inbound_secret"}.
	answer := map[string]any{"status": "ok", "generation": len(p.heartbeats), "platform_inbound_secret": p.inbound}
	p.mu.Unlock()
	return http.StatusOK, answer
}

// InboundSecret is the platform_inbound_secret register and heartbeat answer with.
func (p *Platform) InboundSecret() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inbound
}

// SetInboundSecret changes the platform_inbound_secret the next answers carry.
func (p *Platform) SetInboundSecret(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inbound = s
}
