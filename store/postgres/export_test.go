package postgres

// The append statements, for the plan test.
const (
	MergedSQL = mergedSQL
	AppendSQL = appendSQL
	InScope   = inScope
)
