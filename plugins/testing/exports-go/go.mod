module exports

go 1.26

require kubeplug/sdk v0.0.0

replace kubeplug/sdk => ../../sdk-go
