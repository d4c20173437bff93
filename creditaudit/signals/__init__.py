"""creditaudit.signals"""
