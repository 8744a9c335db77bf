package molecule

import (
	"strconv"

	"github.com/molecule-ai/codex-warm/inbox/molecule/platform"
	"go.uber.org/zap"
)

// registered acts on register's answer: it saves a token the platform issued, and says clearly
// when the platform did not take the workspace as a poll-mode one.
func (m *Inbox) registered(a platform.RegisterAnswer) {
	if a.AuthToken != "" {
		if err := m.client.SaveToken(a.AuthToken); err != nil {
			m.log.Warn("the platform issued a workspace token at register; using it, but it could not be saved",
				zap.String("token_file", m.cfg.TokenFile), zap.Error(err))
		} else {
			m.log.Info("the platform issued a workspace token at register; saved it", zap.String("token_file", m.cfg.TokenFile))
		}
	}
	if a.DeliveryMode != "" && a.DeliveryMode != "poll" {
		// The platform takes the mode a register asks for (registry.go resolveDeliveryMode), so
		// this is a platform that does not know poll mode, or something between it and us.
		m.log.Error("the platform registered the workspace in delivery mode "+strconv.Quote(a.DeliveryMode)+", not poll, though poll was asked for: "+
			"it would push messages to the workspace's URL, which this daemon does not serve; polling on, "+
			"but check that the platform at this URL supports poll-mode workspaces",
			zap.String("delivery_mode", a.DeliveryMode))
	}
}
