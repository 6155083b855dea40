"""The vocabulary, pure: units and their parsing, names, link layers, a link's parameters,
profiles, cohorts, cells and requests as frozen values (``cells``: a cell's capacities
parsed, how cohorts join cells), host and port selectors, the link model of
how long a transfer takes, a request described as data (``summary``), one request split
into a request per router of a fleet (``fleet``; the Ansible collection in ``ansible/``
applies them), and Kubernetes pods selected into one assignment per node (``k8s``).

May import: errors.
"""
