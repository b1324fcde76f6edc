module {{name}}

go 1.26

require kubeplug/sdk v0.0.0

// The SDK kubeplug.toml pins, unpacked by `kubeplug build` (keep the
// version in this path equal to `sdk` there).
replace kubeplug/sdk => ./.kubeplug/sdk/{{sdk_version}}/plugins/sdk-go
