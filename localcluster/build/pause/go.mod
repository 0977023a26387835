module tensorkiln.dev/localcluster/pause

go 1.26.0
