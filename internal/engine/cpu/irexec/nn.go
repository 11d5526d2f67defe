package irexec

// buildNN compiles the neural-network ops.
func buildNN(nc *nodeCtx) (step, error) {
	return nil, unsupportedf("", "no kernel for %s", nc.n.Op.Kind())
}
