module kubeplug/sdk

go 1.26
