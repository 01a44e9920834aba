"""TLS material: a CA and the serving certificate signed by it, rotation and the caBundle."""
