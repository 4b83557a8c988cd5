"""Link prediction on static graphs (mode `link`): a minibatch model encodes the nodes of
sampled neighbourhoods, a decoder (`gnnsys/models/decoders.py`) scores node pairs."""
