package metrics

import "github.com/prometheus/client_golang/prometheus"

// newCommands is codex_warm_chat_commands_total: the chat commands answered, by command. The
// label is the command's name (a fixed set), never the chat.
func newCommands() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "chat_commands_total",
		Help: "Chat commands answered, by command (stop, new, status, help, approve, deny, model, effort, compact, undo), on either inbox."},
		[]string{"command"})
}

// ObserveCommand counts one chat command answered.
func (m *Metrics) ObserveCommand(name string) {
	m.commands.WithLabelValues(name).Inc()
}
