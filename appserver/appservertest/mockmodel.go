package appservertest

import "github.com/molecule-ai/codex-warm/mockmodel"

// These names forward to package mockmodel, where the mock model moved so that production
// binaries can link it without this package. They remain only for supervisor/codex_test.go,
// which is being changed in parallel; once it uses package mockmodel, delete this file.
type (
	MockModel       = mockmodel.Model
	MockModelConfig = mockmodel.Config
	ModelRequest    = mockmodel.Request
	ModelReply      = mockmodel.Reply
)

// NewMockModel forwards to mockmodel.New; see the comment on MockModel.
func NewMockModel(cfg MockModelConfig) (*MockModel, error) { return mockmodel.New(cfg) }

// DefaultScript forwards to mockmodel.DefaultScript; see the comment on MockModel.
func DefaultScript(req ModelRequest) ModelReply { return mockmodel.DefaultScript(req) }
