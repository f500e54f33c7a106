module github.com/looopy-go/looopy/examples/plugins/authed-api

go 1.26.8

require github.com/looopy-go/looopy v0.0.0

replace github.com/looopy-go/looopy => ../../..
