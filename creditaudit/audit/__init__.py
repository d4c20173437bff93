"""creditaudit.audit"""
