"""The openstack provider driver (openstacksdk)."""
