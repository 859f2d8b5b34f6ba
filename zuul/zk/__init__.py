"""Zuul's own ZooKeeper records (beside Nodepool's schema in nodepool/zk):
the resolved provider configuration zuul-launcher serves
(``launcher_config``) and, for seed 001's image lifecycle, image builds
and uploads (``images``)."""
