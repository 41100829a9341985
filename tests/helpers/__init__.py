"""What the tests share: the platforms they start from, the readers of the errors they expect,
rendered and synthesized platforms, and the fakes and tables several test folders use."""
