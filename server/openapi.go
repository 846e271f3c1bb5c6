package server

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the API, served at
// /api/openapi.json. TestOpenAPI_ListsExactlyTheRoutes keeps it in step
// with the routes.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPI)
}
