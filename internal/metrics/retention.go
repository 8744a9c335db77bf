package metrics

import "github.com/prometheus/client_golang/prometheus"

// RetentionCounts is what the archive log did since the daemon started, and how many chats are
// archived now (supervisor.Supervisor.RetentionCounts). No chat key is a label.
type RetentionCounts struct {
	Archived, Deleted, Unarchived, Told int64
	// ArchivedNow counts the chats whose thread is archived or deleted and that have not come
	// back.
	ArchivedNow int64
	// LeftNow counts the threads chats left (/new) that are not deleted yet, live or archived:
	// what the sweep still has to archive or delete.
	LeftNow int64
}

var (
	descArchived    = desc("threads_archived_total", "Threads of idle chats, and threads chats left (/new) that long ago, archived (thread/archive) since the daemon started.")
	descDeleted     = desc("threads_deleted_total", "Archived threads (chats' and left ones) deleted for good (thread/delete) since the daemon started.")
	descUnarchived  = desc("threads_unarchived_total", "Archived threads brought back because their chat wrote again, since the daemon started.")
	descTold        = desc("threads_gone_total", "Chats that came back to a deleted thread, started a new one and were told, since the daemon started.")
	descArchivedNow = desc("chats_archived", "Chats whose thread is archived or deleted and that have not written since.")
	descLeftNow     = desc("threads_left", "Threads chats left (/new) not deleted yet, live or archived.")
)

type retentionCollector struct{ read func() RetentionCounts }

func (c *retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descArchived, descDeleted, descUnarchived, descTold, descArchivedNow, descLeftNow} {
		ch <- d
	}
}

func (c *retentionCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.read()
	ch <- prometheus.MustNewConstMetric(descArchived, prometheus.CounterValue, float64(r.Archived))
	ch <- prometheus.MustNewConstMetric(descDeleted, prometheus.CounterValue, float64(r.Deleted))
	ch <- prometheus.MustNewConstMetric(descUnarchived, prometheus.CounterValue, float64(r.Unarchived))
	ch <- prometheus.MustNewConstMetric(descTold, prometheus.CounterValue, float64(r.Told))
	ch <- prometheus.MustNewConstMetric(descArchivedNow, prometheus.GaugeValue, float64(r.ArchivedNow))
	ch <- prometheus.MustNewConstMetric(descLeftNow, prometheus.GaugeValue, float64(r.LeftNow))
}
